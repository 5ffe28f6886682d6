"""``python -m pglogq.ticker`` = ``pglogq-ticker``."""

from pglogq.ticker.cli import main

if __name__ == "__main__":
    main()
