# The user's own sitecustomize, which the recorder must still run.
import os

marker = os.environ.get("USERSITE_MARKER")
if marker:
    with open(marker, "w") as f:
        f.write("user sitecustomize ran")
