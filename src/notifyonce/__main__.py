"""`python -m notifyonce`: the command line."""

from notifyonce._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
