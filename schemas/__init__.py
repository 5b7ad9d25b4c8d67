"""One definition per thing: the event contract (`events`) and the Delta tables (`tables`)."""
