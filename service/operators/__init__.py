"""Operators: the people who run elicitd, signed in at an issuer marked for operator sign-in."""
