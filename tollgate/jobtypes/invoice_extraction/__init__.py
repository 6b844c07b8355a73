"""Invoice extraction: the schema the model must fill, the prompt, and the validation policy."""
