# Plots the data tbx_bench writes (run in its --out directory):
# throughput.dat ("contender msg/s") and, when the storage phase ran,
# storage-<contender>.dat ("records processed, deduplication rows").
set terminal pngcairo size 1200,500 font ",10"
set output "bench.png"
set multiplot layout 1,2
set title "Throughput (median, messages/s)"
set style data histograms
set style fill solid 0.7 border -1
set boxwidth 0.7
set yrange [0:*]
set grid ytics
unset key
plot "throughput.dat" using 2:xtic(1) linecolor rgb "#4477aa"
set title "Deduplication storage (rows) vs records processed"
set style data linespoints
set key top left
set xlabel "records processed"
set ylabel "rows"
set format x "%.0s%c"
set format y "%.0s%c"
if (system("test -f storage-inbox.dat && echo 1 || echo 0") + 0) {
  plot "storage-inbox.dat" using 1:2 title "inbox (processed ids)" linewidth 2, \
       "storage-tokenbox.dat" using 1:2 title "tokenbox (tokens + registrations)" linewidth 2
} else {
  set label 1 "storage phase skipped" at graph 0.5,0.5 center
  plot NaN notitle
}
unset multiplot
