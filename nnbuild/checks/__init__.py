"""Gates and reports: semantic (max |C - reference|), memory, deadline; one report format."""
