"""The team on the box: members and their tokens, the audit log, the Unix accounts jobs run
as, which paths a job may name, and the modes of gpuq's state directory."""
