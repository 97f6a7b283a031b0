"""A workflow task completes: one logical write, planned once, written in one of three forms.

- plan.py: commands parsed, numbered and planned (no I/O); `RULES`, the one table of commands.
- effects.py: what the plan accumulates (events, activity and timer rows, the close, outcome).
- statements.py: the SQL of the three forms, side by side, built from the same fragments.
- at_position.py: the one-statement forms (`complete_at_position`, the activity result fused
  with the workflow task that consumed it, `complete_with_workflow_task`).
- transactional.py: the transactional form (`complete_workflow_task`), which every completion
  can take and the others fall back to.
"""
