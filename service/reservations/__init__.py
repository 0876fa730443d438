"""Reservations: GPUs booked ahead for a list of users or a Unix group, for a window
(`/v1/reservations`, `gpuq reserve`). This package books, changes, lists and deletes them;
the scheduler places jobs around them (`service.scheduler.bookings`, `reservation_windows`).
"""
