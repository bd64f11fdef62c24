// Simulator module: the App Store simulator and oracle (issue 5).
