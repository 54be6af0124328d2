"""OmniPost."""
