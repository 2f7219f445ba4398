"""``python -m ddp_migrate``."""

from ddp_migrate.cli import main

if __name__ == "__main__":
    main()
