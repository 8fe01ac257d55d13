// cache layer (filled in by step 4).
