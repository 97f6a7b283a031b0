"""`python -m burrow ...`: the same command line as the `burrow` script."""

from __future__ import annotations

from burrow.launch import main

if __name__ == "__main__":
    main()
