"""The episode loop, its trace and the world model it keeps."""
