"""``python -m workhive`` runs the CLI."""

from workhive.cli import main

main()
