#pragma once
// The dashboard's page and its script (page.cpp): static text, served as they are. The
// script polls /api/state every second and draws with the DOM (textContent only); the
// plots come as SVG from /api/plots.svg. Nothing is fetched from anywhere else.

#include <string_view>

namespace starling::coordinator {

std::string_view dashboardPage();
std::string_view dashboardScript();

}  // namespace starling::coordinator
