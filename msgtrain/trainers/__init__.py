"""Optional references for trainers (need extra dependencies: ``pip install 'msgtrain[tree]'`` for torch)."""
