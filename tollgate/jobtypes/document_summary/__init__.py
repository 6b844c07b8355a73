"""Document summary: a summary within a word limit and key facts, each with evidence in the text."""
