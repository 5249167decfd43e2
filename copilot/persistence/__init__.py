"""PostgreSQL: where it runs (embedded or ``DATABASE_URL``), the pool, the migrations."""
