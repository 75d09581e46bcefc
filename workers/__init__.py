"""Worker profiles: one file per role, copied and edited by the user. See README.md."""
