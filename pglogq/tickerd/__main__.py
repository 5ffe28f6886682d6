"""``python -m pglogq.tickerd`` = ``pglogq-ticker``."""

from pglogq.tickerd.cli import main

if __name__ == "__main__":
    main()
