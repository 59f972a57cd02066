"""Helpers the bench scripts share (not a bench: ``make bench`` runs only ``bench/*.py``)."""
