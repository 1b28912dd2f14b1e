"""The chapter's figures."""
