"""Optimizations as jobs, one idea in one package; the HTTP layer enters through `jobs` (open_jobs,
the worker pool). A job runs in this process's warm worker pool (pool.py, local_store.py) or, when
a queue is configured, on Celery over Redis (queue_store.py) to `optu worker` processes on any
machine that reaches the broker (worker.py); broker.py is what both sides of the queue agree on
(the Celery app, a job's Redis keys). Queue messages are acknowledged late, so a job whose worker
dies is delivered again."""
