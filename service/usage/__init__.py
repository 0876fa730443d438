"""Who used what: a ledger of ended attempts (`ledger`), reports over a period of it
(`report`, pure; `reads`), and how well one job used what it asked for (`efficiency`)."""
