"""The model provider: the OpenAI client port and the built-in simulated provider."""
