"""``python -m engage_sandbox``: the same program as the ``engage-sandbox`` console script."""

from engage_sandbox.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
