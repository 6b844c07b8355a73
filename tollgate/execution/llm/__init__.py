"""The provider port and its OpenAI adapter: one structured-output call per attempt, outcomes classified."""
