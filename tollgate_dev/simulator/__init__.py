"""An OpenAI-compatible provider on 127.0.0.1 that answers from the sample invoices, with rate limits and
faults on demand."""
