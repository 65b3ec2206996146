"""Chat sessions: a model, a context policy, and the conversation they share."""
