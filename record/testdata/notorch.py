import sys

print("no torch here")
sys.exit(0)
