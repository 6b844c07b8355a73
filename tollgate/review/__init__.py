"""Review: results that failed validation wait for a reviewer, who approves, corrects or rejects them."""
