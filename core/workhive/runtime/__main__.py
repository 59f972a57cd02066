"""``python -m workhive.runtime --events-fd N``: a worker process, started by the supervisor."""

from workhive.runtime.process import main

main()
