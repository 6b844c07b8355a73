"""The ``tollgate`` command for operators and support staff; the development package adds its own commands."""
