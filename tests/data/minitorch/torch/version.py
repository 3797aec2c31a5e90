hip = "5.2.3"
cuda = None
