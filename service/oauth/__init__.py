"""elicitd as an OAuth 2 authorization server for one grant: RFC 8693 token exchange."""
