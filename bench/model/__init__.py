"""A real small model on 127.0.0.1 for the model accuracy benchmark: its installer and its server."""
