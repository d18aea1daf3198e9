"""The canonical engine picture, whatever the engine."""
