"""The contract every part speaks: history events, workflow commands and the wire shapes.

A leaf package: replay, the store, the server and the broker import it; it imports none of
them (only `burrow.codec` and `burrow.errors`), so a new event or command is defined once.
"""
