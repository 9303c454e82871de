"""thinkproxy: an OpenAI-compatible reverse proxy for thinking models."""

__version__ = "0.1.0"
