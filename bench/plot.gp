# Plots the data tbx_bench writes (run in its --out directory):
# throughput.dat ("contender msg/s") and, when the storage phase ran,
# storage-<contender>.dat ("records processed, deduplication rows").
# Only what the run measured is plotted: without the storage phase the
# picture has the throughput panel alone, and a line on standard error
# says so.  (Plotting an empty panel fails: "all points y value
# undefined".)
storage = system("test -s storage-inbox.dat && test -s storage-tokenbox.dat && echo 1 || echo 0") + 0
if (storage) {
  set terminal pngcairo size 1200,500 font ",10"
} else {
  set terminal pngcairo size 600,500 font ",10"
  print "plot: no storage phase in this run: throughput only"
}
set output "bench.png"
if (storage) {
  set multiplot layout 1,2
}
set title "Throughput (median, messages/s)"
set style data histograms
set style fill solid 0.7 border -1
set boxwidth 0.7
set yrange [0:*]
set grid ytics
unset key
plot "throughput.dat" using 2:xtic(1) linecolor rgb "#4477aa"
if (storage) {
  set title "Deduplication storage (rows) vs records processed"
  set style data linespoints
  set key top left
  set xlabel "records processed"
  set ylabel "rows"
  set format x "%.0s%c"
  set format y "%.0s%c"
  plot "storage-inbox.dat" using 1:2 title "inbox (processed ids)" linewidth 2, \
       "storage-tokenbox.dat" using 1:2 title "tokenbox (tokens + registrations)" linewidth 2
  unset multiplot
}
