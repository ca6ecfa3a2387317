#pragma once
// Result files: every file is written whole or not at all (linattn::write_file_atomically).
#include <filesystem>
#include <string>
#include <vector>

namespace linattn::cli {

// Creates the folder (and parents); throws std::runtime_error naming it on failure.
void make_folder(const std::filesystem::path& folder);

// One CSV field: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& value);

// Runs gnuplot on `script` inside `folder` (names in the script are relative to it); the script
// must write its plot to the gnuplot variable png, set to `temp_png`, which is then renamed over `png`. Returns an
// empty string on success, else why not (gnuplot missing or failed): the plot is optional.
std::string run_gnuplot(const std::filesystem::path& folder, const std::string& script, const std::string& temp_png,
                        const std::string& png);

// The script's output lines: STEM.png when a person reruns `gnuplot STEM.gp`, the variable png when
// write_plot runs it (gnuplot -e "png='STEM.png.tmp'", renamed once whole).
std::string plot_output(const std::string& stem);

// Writes `script` to folder/STEM.gp and runs it (its output from plot_output(STEM)), leaving
// folder/STEM.png; says "wrote ..." on stdout, or warns on stderr why there is no plot.
void write_plot(const std::filesystem::path& folder, const std::string& stem, const std::string& script);

}  // namespace linattn::cli
