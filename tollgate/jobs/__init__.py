"""The extraction job aggregate: its states and the transitions between them."""
