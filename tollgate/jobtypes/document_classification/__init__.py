"""Document classification: one label from the tenant's set, with evidence in the text."""
