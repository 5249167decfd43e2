"""Who the rep is and the delegated tokens that act as them (never in model context)."""
