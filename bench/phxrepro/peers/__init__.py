# SPDX-License-Identifier: MIT
"""Phoenix side by side with the safetensors loaders users pick instead.

Every measured load runs in a fresh Python process of its own (worker.py)
whose CUDA context exists before the clock starts; the experiments in
phxrepro.experiments.peers and .concurrency only plan the jobs, start the
workers and collect their JSON records.

  loaders.py    the loaders by name: what a user calls, fresh and steady
  worker.py     one job in one process: evict or prime, time, verify
  verify.py     bit-for-bit comparison with safetensors' own load
  pagecache.py  cold (evict a file) and warm (read it once) page cache
  schedule.py   the round-robin order of the jobs
"""
