"""The application layer: publishing, reading, searching and the embedded runner."""
