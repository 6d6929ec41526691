"""Browser sign-in at the subject's issuer: the identity check every flow page runs first, and the
``/auth`` routes of the OIDC login. It sits above both ``flows`` and ``identity``."""
