"""Lists the directory argv[1] with os.scandir(), going on past up to five errors, and says how
many names it was given, which errors it was told of, and which names a second listing has that
the first did not (dotu-read-error-position)."""

import os, sys
it = os.scandir(sys.argv[1])
names, errors = [], []
while len(errors) < 5:
    try:
        entry = next(it)
    except StopIteration:
        break
    except OSError as err:
        errors.append(err.strerror)
        continue
    names.append(entry.name)
print(f"{len(names)} names listed, {len(set(names))} distinct; errors: {errors}")
missing = sorted(set(os.listdir(sys.argv[1])) - set(names))
print("missing from the listing that met the error:", missing)
