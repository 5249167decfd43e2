"""The sandbox identity provider: an Entra-ID-like issuer of RS256 access tokens.

``ca`` makes the TLS material the HTTPS listener serves, ``keys`` holds the token
signing key, ``tokens`` issues and validates tokens and ``provider`` exposes the
OpenID discovery, JWKS and on-behalf-of token endpoints.
"""
