# guest: open d, wait for the host's swap, then list the open directory and d by name
import os, time
fd = os.open("d", os.O_RDONLY | os.O_DIRECTORY)
open("opened", "w").close()
while not os.path.exists("swapped"):
    time.sleep(0.1)
try:
    print("listdir(open d):", sorted(os.listdir(fd)))
except OSError as e:
    print("listdir(open d):", e)
print("listdir('d'):", sorted(os.listdir("d")))
