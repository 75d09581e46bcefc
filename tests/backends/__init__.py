"""The backend contract: events, responses and their builder, errors, the mock backend."""
