"""The sweeps domain: a sweep spec expanded into member jobs (`expand`, pure), stored whole
(`submit`), read with its leaderboard (`reads`, `leaderboard`, `views`), cancelled or held as
one (`actions`), and the stopping rule the scheduler applies to it (`stopping`, pure)."""
