// Workers
