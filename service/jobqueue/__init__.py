"""Jobs on a real queue: Celery over Redis carries optimization jobs from any number of API replicas
to `optu worker` processes on any machine that reaches the broker. The broker module is what both
sides agree on (the Celery app, the Redis keys of a job); the worker module is the consuming side.
Messages are acknowledged late, so a job whose worker dies is delivered again."""
