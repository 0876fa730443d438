"""Where the state lives: the engine (SQLite or PostgreSQL), the tables, the migrations'
runner, pagination, and the notices that wake waiting requests when a write commits."""
