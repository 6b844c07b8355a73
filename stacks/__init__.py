"""CDK stacks of Tollgate: one per owned concern, combined in ``app.py``."""
