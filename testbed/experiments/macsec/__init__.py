"""The MACsec experiment kind."""
